"""The guarded optimizer step that SFT (lib/training/sft.py) and RL (train.py) share.

`optimizer_step` clips the gradient norm and steps, unless the loss or the gradient norm is
non-finite: then the update is skipped and counted, the gradients are cleared either way, and
`max_bad_updates` skipped updates in a row stop the run (the weights were changed by none of
them, so a checkpoint or final/ never holds a non-finite update).

    python -m pytest -q tests/test_train.py -k "nan or bad_updates"
"""
import math

import torch


def optimizer_step(model, opt, loss, grad_clip, max_bad_updates, bad):
    """Clip to `grad_clip` and step, unless the loss or the gradient norm is non-finite: then
    the update is skipped. `bad` is the count of non-finite updates in a row so far. Returns
    (non-finite updates in a row, grad norm, stepped); stops the run at `max_bad_updates`."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    stepped = math.isfinite(loss) and math.isfinite(norm)
    if stepped:
        opt.step()
        bad = 0
    else:
        bad += 1
        if bad >= max_bad_updates:
            raise SystemExit(f"stopping: {bad} non-finite updates in a row (loss {loss}, grad norm {norm}); "
                             "the weights were not changed by any of them")
    opt.zero_grad(set_to_none=True)
    return bad, norm, stepped
