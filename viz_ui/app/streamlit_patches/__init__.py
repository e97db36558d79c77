"""Every replacement of a Streamlit internal, and every reliance on Streamlit's frontend internals, in one place."""
