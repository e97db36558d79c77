"""``python -m viz_model.training``: see :mod:`viz_model.training.train`."""

from viz_model.training.train import main

if __name__ == "__main__":
    main()
