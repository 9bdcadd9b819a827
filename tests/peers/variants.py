"""The drafters the peer builders make (pure data: the tests import it without torch)."""

_BASE = dict(hidden_size=64, heads=4, kv_heads=2, head_dim=24, intermediate=160, vocab=512, draft_vocab=128, layers=1,
             aux=[1, 3, 5], norm_before_residual=True)

# Built and saved by speculators 0.9.0. All float32 ones also carry speculators' own step-0 logits.
SPECULATORS = [
    dict(_BASE, name="example-dims"),  # GQA, head_dim 24 != 64/4, draft vocabulary 128 of 512
    dict(_BASE, name="residual-unnormed", norm_before_residual=False),
    dict(_BASE, name="norm-before-fc", norm_before_residual=False, norm_before_fc=True),
    dict(_BASE, name="fc-norm-4-aux", aux=[1, 3, 5, 7], fc_norm=True),
    dict(_BASE, name="norm-output", norm_output=True),
    dict(_BASE, name="two-layers", layers=2),
    dict(_BASE, name="biases", attention_bias=True, mlp_bias=True),
    dict(_BASE, name="qwen3", model_type="qwen3", head_dim=32),
    dict(_BASE, name="full-vocab", kv_heads=4, head_dim=16, draft_vocab=512, rope_theta=500000.0),
    dict(_BASE, name="bf16", dtype="bfloat16"),
]

# Saved before the verifier's weights were loaded: embed_tokens and lm_head keep speculators' NaN initialisation.
SPECULATORS_UNLOADED = dict(_BASE, name="verifier-not-loaded", dtype="bfloat16", keep_nan=True)

# Built with SpecForge 0.2.0's LlamaForCausalLMEagle3 and written by its SGLang exporter (no embed_tokens).
SPECFORGE = [
    dict(name="base"),
    dict(name="fc-norm", fc_norm=True),
    dict(name="wide-target", target_hidden_size=96),
    dict(name="llama3-rope", rope={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    dict(name="yarn-rope", rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 0}),
]

# Built as speculators 0.9.0's train CLI builds a drafter (create_transformer_layer_config + from_training_args, on a
# tiny 8-layer verifier; build_train_cli.py): the CLI's defaults (train/config/schema.py:145-170, 754-795: every
# layer a 2048-token sliding one, norm_before_residual, norm_before_fc and norm_output true), a plain one (full
# attention, every flag false), and one whose only flag is norm_output (the normed state fed back).
TRAIN_CLI = [
    dict(name="cli-defaults", norm_before_residual=True, norm_before_fc=True, norm_output=True),
    dict(name="plain", norm_before_residual=False, norm_before_fc=False, norm_output=False, full_attention=[0]),
    dict(name="normed-feedback", norm_before_residual=False, norm_before_fc=False, norm_output=True,
         full_attention=[0]),
]
