"""Hook functions belong to the thread that added them: the app runs every session's script in its own thread on one
shared model, so a session's recording or ablation must not reach another session's forward pass."""

import copy
import threading

import torch

from conftest import small_model


def tokens(seed: int, n: int = 12) -> torch.Tensor:
    return torch.randint(0, 64, (1, n), generator=torch.Generator().manual_seed(seed))


def test_a_forward_pass_in_another_thread_neither_runs_nor_feels_this_threads_hooks():
    model = small_model()
    mine, theirs = tokens(1), tokens(2)
    _, alone = model.run_with_cache(theirs)  # what the other thread must record, whatever this one does
    inside, done = threading.Event(), threading.Event()
    callers: list[int] = []

    def ablate(t: torch.Tensor, hook) -> torch.Tensor:
        callers.append(threading.get_ident())
        if not inside.is_set():  # hold this thread's pass inside its hooked forward while the other thread runs
            inside.set()
            done.wait(10)
        return torch.zeros_like(t)

    seen = {}

    def other() -> None:
        inside.wait(10)
        try:
            seen["active"] = model.hook_dict["blocks.0.hook_resid_post"].active
            _, seen["cache"] = model.run_with_cache(theirs)
        finally:
            done.set()

    worker = threading.Thread(target=other)
    worker.start()
    ablated = model.run_with_hooks(mine, fwd_hooks=[("blocks.0.hook_resid_post", ablate)])
    worker.join(20)

    assert inside.is_set() and done.is_set()
    assert set(callers) == {threading.get_ident()}  # only this thread's pass called the hook
    assert seen["active"] is False  # the other thread saw no listener on the hook this thread held
    for name in alone:
        assert torch.equal(seen["cache"][name], alone[name]), name  # its recording is its own, unablated
    assert not torch.equal(ablated, model(mine))  # and the ablation did act on this thread's pass
    assert all(not hook._fns for hook in model.hook_dict.values())  # every hook removed afterwards


def test_concurrent_recordings_of_different_texts_each_get_their_own_activations():
    model = small_model()
    inputs = [tokens(seed) for seed in range(4)]
    alone = [model.run_with_cache(ids)[1] for ids in inputs]
    wrong = []
    start = threading.Barrier(len(inputs))

    def record(i: int) -> None:
        start.wait(10)
        for _ in range(15):
            _, cache = model.run_with_cache(inputs[i])
            wrong.extend(name for name in alone[i] if not torch.equal(cache[name], alone[i][name]))

    workers = [threading.Thread(target=record, args=(i,)) for i in range(len(inputs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not wrong


def test_a_hook_is_removed_by_the_thread_that_added_it_and_a_copy_of_the_model_has_none():
    model = small_model()
    hook = model.hook_dict["blocks.0.hook_resid_post"]
    fn = lambda t, h: None  # noqa: E731
    hook.add_hook(fn)
    assert hook.active
    errors = []

    def remove_elsewhere() -> None:
        try:
            hook.remove_hook(fn)
        except ValueError as exc:
            errors.append(exc)

    t = threading.Thread(target=remove_elsewhere)
    t.start()
    t.join()
    assert len(errors) == 1 and hook.active  # another thread cannot remove this thread's function
    twin = copy.deepcopy(model)  # a copy (a dictionary job's) carries no function of the original's threads
    assert not twin.hook_dict["blocks.0.hook_resid_post"].active and hook.active
    assert all(not h._fns for h in twin.hook_dict.values())
    assert torch.equal(twin(tokens(3)), model(tokens(3)))
    hook.remove_hook(fn)
    assert not hook.active and not hook._fns
