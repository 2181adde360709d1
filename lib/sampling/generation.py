"""rollout.generate's log-probs of the sampled ids under Hugging Face `model.generate` (`Chosen`),
one step's logits kept at a time."""
from transformers import LogitsProcessor


class Chosen(LogitsProcessor):
    """`generate`'s log-probs of the sampled ids, as a logits processor: each step's logits (float32,
    (B, V), before the sampling's temperature) become log_softmax, kept until the next step, whose
    input ids end with the id just sampled: its log-prob is kept (`lps`, one (B,) per step) and
    the step's (B, V) dropped. After generate, `take(the last ids)` ends it. What output_logits
    would give at the sampled ids, with one step's vocabulary kept at a time instead of every
    step's. generate runs its own processors first and appends the temperature after ours; with
    the flags rollout.generate passes it runs none of the first kind (a generation_config that
    set, say, min_new_tokens would bend the draws and these log-probs alike)."""

    def __init__(self):
        self.logp, self.lps = None, []

    def __call__(self, input_ids, scores):
        self.take(input_ids[:, -1])
        self.logp = scores.log_softmax(-1)                                  # (B, V) float32
        return scores

    def take(self, ids):
        """Keep the pending step's log-probs at `ids` (B,), then drop its (B, V)."""
        if self.logp is not None:
            self.lps.append(self.logp.gather(-1, ids[:, None])[:, 0])       # (B,)
        self.logp = None
