"""viz_ui/app/streamlit_patches/presenter.py: a custom component's value is presented as Streamlit's own presenter does, through one
class (Streamlit 1.67 makes a new class at every read, a reference cycle for the garbage collector each time)."""

from __future__ import annotations

import copy
import pickle
from types import SimpleNamespace

import pytest
from streamlit.components.v2 import presentation
from streamlit.errors import StreamlitAPIException

from viz_ui.app.streamlit_patches import presenter as ours

AGG, CID = "agg-id", "component-id"


class FakeWidgets:
    """The parts of Streamlit's widget state a presenter reads and writes."""

    def __init__(self, payloads, value_type="json_trigger_value"):
        self.widget_metadata = {AGG: SimpleNamespace(value_type=value_type)} if value_type else {}
        self.payloads = payloads
        self.stored = []

    def __getitem__(self, key):
        if key != AGG or self.payloads is None:
            raise KeyError(key)
        return self.payloads

    def set_from_value(self, widget_id, value):
        self.stored.append((widget_id, value))


def session(payloads=None, value_type="json_trigger_value"):
    return SimpleNamespace(_new_widget_state=FakeWidgets(payloads, value_type),
                           _key_id_mapper=SimpleNamespace(get_key_from_id=lambda wid: "chart"))


CASES = [
    ("not a dict", [{"event": "click", "value": 1}], "json_trigger_value"),
    ({"a": 1}, None, None),  # no trigger widget registered: the stored value itself
    ({"a": 1}, None, "json_trigger_value"),
    ({"a": 1, "click": "stored"}, [{"event": "click", "value": {"x": 2}}, "junk", {"event": 3}], "json_trigger_value"),
    ({"a": 1}, {"event": "hover", "value": 5}, "json_trigger_value"),
    ({}, "not payloads", "json_trigger_value"),
]


@pytest.mark.parametrize("base, payloads, value_type", CASES)
def test_presents_the_value_streamlit_presents(base, payloads, value_type):
    theirs = presentation.make_bidi_component_presenter(AGG, CID, None)(base, session(payloads, value_type))
    mine = ours.presenter(AGG, CID, None)(base, session(payloads, value_type))
    assert mine == theirs and isinstance(mine, dict) == isinstance(theirs, dict)
    if isinstance(theirs, dict) and type(theirs) is not dict:  # a write-through dict: read by attribute too
        assert isinstance(mine, ours.WriteThrough)
        assert all(getattr(mine, key) == getattr(theirs, key) for key in theirs)
        assert mine.missing is None and theirs.missing is None
    else:
        assert mine is base


def test_one_class_for_every_read():
    state = session([{"event": "click", "value": 1}])
    theirs = presentation.make_bidi_component_presenter(AGG, CID, None)
    mine = ours.presenter(AGG, CID, None)
    assert type(theirs({"a": 1}, state)) is not type(theirs({"a": 1}, state))  # what this module fixes
    assert type(mine({"a": 1}, state)) is type(mine({"b": 2}, state)) is ours.WriteThrough


def test_writes_go_back_to_the_component_state_as_streamlit_does():
    for make in (presentation.make_bidi_component_presenter, ours.presenter):
        state = session([])
        value = make(AGG, CID, {"value", "selection"})({"value": 1}, state)
        value["value"] = 2
        value.selection = [3]  # by attribute
        value["other"] = 4  # not a key with a callback: ignored
        del value["value"]
        value._private = 5  # an attribute, not a key
        assert dict(value) == {"selection": [3]} and value._private == 5
        assert state._new_widget_state.stored == [(CID, {"value": 2}), (CID, {"value": 2, "selection": [3]}),
                                                  (CID, {"selection": [3]})]
        assert copy.deepcopy(value) is value


def test_a_component_drawn_in_this_run_refuses_writes(monkeypatch):
    ctx = SimpleNamespace(shared=SimpleNamespace(widget_ids_this_run={CID}, form_ids_this_run=set()))
    monkeypatch.setattr(presentation, "get_script_run_ctx", lambda: ctx)
    monkeypatch.setattr(ours, "get_script_run_ctx", lambda: ctx)
    for make in (presentation.make_bidi_component_presenter, ours.presenter):
        state = session([])
        value = make(AGG, CID, None)({"value": 1}, state)
        with pytest.raises(StreamlitAPIException, match="cannot be modified after the component"):
            value["value"] = 2
        with pytest.raises(StreamlitAPIException):
            del value["value"]
        assert dict(value) == {"value": 1} and state._new_widget_state.stored == []


def test_copies_and_pickles():
    state = session([])
    value = ours.presenter(AGG, CID, None)({"value": 1}, state)
    twin = copy.copy(value)
    assert twin == value and twin is not value and isinstance(twin, ours.WriteThrough)
    twin["value"] = 2
    assert value["value"] == 1 and state._new_widget_state.stored == [(CID, {"value": 2})]
    assert pickle.loads(pickle.dumps(value)) == {"value": 1}


def test_install_puts_it_where_streamlit_calls_it():
    from streamlit.components.v2.bidi_component import main
    assert ours.install() and ours.install()  # idempotent
    assert main.make_bidi_component_presenter is ours.presenter
