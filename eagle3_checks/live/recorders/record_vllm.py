"""Record how vLLM reads each conformance checkpoint, running vLLM's own config and loading code on CPU.

    python conformance/record_vllm.py MANIFEST OUT_DIR      # inside a virtualenv with vllm (0.28.0 to 0.34.0)

For each checkpoint of MANIFEST (written by conformance/checkpoints.py), the path a server takes, up to the point
where a GPU would be needed (paths: vllm/ in the 0.33.0 wheel):

1. config: the target's ``ModelConfig``, then ``SpeculativeConfig(method="eagle3", model=DRAFT)``, which parses the
   drafter config and wraps it (EAGLEConfig / SpeculatorsConfig), then the ``VllmConfig``;
2. aux ids: the V2 model runner's ``set_eagle3_aux_hidden_state_layers`` (v1/worker/gpu/spec_decode/eagle/
   eagle3_utils.py:25-43) on a stand-in of the target class, which reads the ids from the draft config or asks the
   target class for its defaults and hands them to the target's ``set_aux_hidden_state_layers``;
3. load: ``load_eagle_model``'s steps (v1/worker/gpu/spec_decode/eagle/utils.py:80-95: draft overrides, draft load
   config, ``get_model``), i.e. ``DefaultModelLoader`` building the drafter class and calling its ``load_weights``.

The harness observes, it does not steer: ``DefaultModelLoader.load_weights`` is wrapped to sentinel-fill the
freshly built model and tap its parameters' weight loaders (see _probe.py) before calling the original. One stub
replaces engine code, a kernel dispatch:

* ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`` (layers/utils.py:532-669), called after
  loading by every linear layer and lm_head (layers/linear.py:215-217, vocab_parallel_embedding.py:69-71). On an
  AMX or oneDNN CPU it repacks the weight for a CPU kernel (``torch.ops._C.convert_weight_packed``,
  ``ops.create_onednn_mm``) that the CUDA wheel does not build, and may drop the original weight. The stub takes
  the function's own torch fallback branch (layers/utils.py:662-665) on every machine, so the loaded weights stay
  inspectable and recordings do not depend on the CPU they were made on.

And one device call, where torch has no accelerator at all (a CPU build of torch, as vLLM 0.32.0's pin resolves to
here): ``torch.accelerator.empty_cache()``, which ``BaseModelLoader.load_model`` calls after loading to release the
caching allocator (model_loader/base_loader.py:93 in 0.32.0) and which raises "Cannot access accelerator device"
without one. It frees memory and computes nothing; the stub makes it a no-op there.

And, from 0.34.0, one platform check (:func:`triton_check_stub`): the CPU platform refuses to configure on x86 without
Triton's CPU backend, which only its model runner's kernels need.

And, for 0.28.0 to 0.30.0 only, the name of one CPU kernel: their ``SiluAndMul`` binds ``torch.ops._C.silu_and_mul``
when it is built on the CPU platform (model_executor/layers/activation.py:130-135 in 0.30.0; 0.31.0 no longer binds
it at construction), and the CUDA wheel carries no CPU ``_C`` library, so every Llama-layer drafter would fail to
build. Where the op is missing, its schema is declared (``_C::silu_and_mul``) with no kernel: the layer builds, and a
call would raise. Loading never calls it.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from contextlib import ExitStack
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any
from unittest import mock

STARTED = time.time()
# Select vLLM's CPU platform (vllm/platforms/__init__.py:174-177); must be set before vllm is imported.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The engines' imports stay in the order the recordings were made with (torch, the probe, then the engine).
# isort: off
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from _probe import (LoadProbe, _engine_frame, checkpoint_tensor_names, engine_stage, free_port,  # noqa: E402
                    harness, read_built_model, run_all)
import _compute  # noqa: E402

import vllm.model_executor.layers.utils as layer_utils  # noqa: E402
from vllm.compilation.backends import set_model_tag  # noqa: E402
from vllm.config import (DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, SpeculativeConfig,  # noqa: E402
                         VllmConfig, replace, set_current_vllm_config)
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear  # noqa: E402
from vllm.model_executor.model_loader import get_model  # noqa: E402
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader  # noqa: E402
from vllm.model_executor.model_loader.utils import get_model_cls  # noqa: E402
from vllm.model_executor.model_loader.weight_utils import default_weight_loader  # noqa: E402
from vllm.model_executor.models.interfaces import EagleModelMixin  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (  # noqa: E402
    get_eagle3_aux_layers_from_config, set_eagle3_aux_hidden_state_layers)
from vllm.v1.worker.gpu.spec_decode.eagle.utils import _should_share  # noqa: E402
# isort: on
try:  # the attention layers the compute's stand-in replaces (0.32.0 and 0.33.0: model_executor/layers/attention/)
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
except ImportError:  # a release that keeps them elsewhere: its compute is not judged (the loading is recorded)
    Attention = MLAAttention = None
try:
    from vllm.config import CompilationConfig, CompilationMode
except ImportError:
    CompilationConfig = CompilationMode = None

# What the releases recorded (0.28.0 to 0.33.0) do differently before get_model, and how the V2 runner decides to
# capture aux states; each branch cites the release it follows.
try:  # 0.31.0 on: the draft's own load config (model_executor/model_loader/utils.py)
    from vllm.model_executor.model_loader.utils import get_draft_load_config
except ImportError:  # 0.28.0 to 0.30.0: load_eagle_model uses the server's load config
    get_draft_load_config = None
try:  # 0.30.0 on: pipeline-parallel-safe draft loading (v1/worker/gpu/spec_decode/utils.py)
    from vllm.v1.worker.gpu.spec_decode.utils import get_pp_safe_draft_load_config
except ImportError:  # 0.28.0, 0.29.0
    get_pp_safe_draft_load_config = None
try:  # 0.33.0: the V2 runner asks the drafter (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py)
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import requires_aux_hidden_states
except ImportError:
    if hasattr(SpeculativeConfig, "uses_aux_hidden_states"):
        # 0.34.0: the runner asks the speculative config (v1/worker/gpu/model_runner.py:317-318), whose eagle3
        # speculator reads eagle_config.use_aux_hidden_state, default True (v1/worker/gpu/spec_decode/eagle/
        # config.py:69-72)
        def requires_aux_hidden_states(spec: Any) -> bool:
            return bool(spec.uses_aux_hidden_states)
    else:  # 0.32.0: every eagle3 drafter gets the aux states (v1/worker/gpu/model_runner.py:299-307)
        def requires_aux_hidden_states(spec: Any) -> bool:
            return spec.method in ("eagle3", "dflash", "dspark", "extract_hidden_states")
try:  # the V1 model runner, 0.28.0 to 0.33.0 (v1/worker/gpu_model_runner.py); 0.34.0 has Model Runner V2 only
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
except ImportError:
    GPUModelRunner = None

ENGINE = "vllm"
VERSION = package_version("vllm")
ROOTS = ("vllm", "transformers")  # packages whose frames locate a refusal
NUM_SPECULATIVE_TOKENS = 3


def keep_weights_gemm(layer: nn.Module, remove_weight: bool) -> None:
    """Stub for dispatch_cpu_unquantized_gemm (see the module docstring): its torch fallback, always."""
    layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)


def fused_shards(module: nn.Module) -> list[tuple[Any, int]] | None:
    """Rows of each shard of a fused weight (tensor parallel size 1). QKVParallelLinear's shard ids are q/k/v
    (layers/linear.py:1073-1077), MergedColumnParallelLinear's 0, 1, ... (layers/linear.py:727)."""
    if isinstance(module, QKVParallelLinear):
        return list(zip(("q", "k", "v"), module.output_sizes, strict=True))
    if isinstance(module, MergedColumnParallelLinear):
        return list(enumerate(module.output_sizes))
    return None


class _TargetLayers(EagleModelMixin, nn.Module):
    """The target's decoder stack reduced to what aux-layer selection reads: the layer list's length and the
    pipeline range (EagleModelMixin, model_executor/models/interfaces.py:1608-1620)."""

    def __init__(self, num_layers: int) -> None:
        nn.Module.__init__(self)
        self.layers = [None] * num_layers
        self.start_layer, self.end_layer = 0, num_layers


def target_standin(target: ModelConfig) -> nn.Module:
    """An instance of the target's real model class (its eagle3 methods intact) whose decoder is _TargetLayers:
    building the real target would load a full model. Multimodal targets delegate to a language model
    (kimi_k25.py:470-474), which is the same kind of stand-in."""
    num_layers = target.get_total_num_hidden_layers()
    cls = get_model_cls(target)
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.model = _TargetLayers(num_layers)
    text = getattr(target.hf_config, "text_config", None)
    if text is not None and text is not target.hf_config:
        inner_arch = (getattr(text, "architectures", None) or [])[:1]
        inner_cls = target.registry.resolve_model_cls(inner_arch, model_config=target)[0]
        language_model = inner_cls.__new__(inner_cls)
        nn.Module.__init__(language_model)
        language_model.model = model.model
        model.language_model = language_model
    return model


def captured_before_layers(layers: tuple[int, ...], num_layers: int) -> list[int]:
    """Every vLLM target captures the residual stream entering layer L for each L in its aux layers, L = N being
    the stack's output (interfaces.py:1640-1646 with llama.py:427-441, qwen2.py:424-434, gpt_oss.py:526-532;
    deepseek_v2.py:1561-1587 tests idx and end_layer the same way). Ids outside 0..N capture nothing."""
    return sorted({i for i in layers if 0 <= i <= num_layers})


def read_aux(record: dict, spec: SpeculativeConfig, target: ModelConfig) -> None:
    """The V2 runner sets the target's aux layers only when the drafter asks for aux states
    (v1/worker/gpu/model_runner.py:306-308, 412-416)."""
    aux = record["aux"]
    aux["requires_aux_hidden_states"] = requires_aux_hidden_states(spec)
    aux["ids_in_config"] = get_eagle3_aux_layers_from_config(spec)
    # The V1 model runner (still used without Triton or with parallel drafting) reads them differently
    # (v1/worker/gpu_model_runner.py:5202-5224); 0.34.0 has none.
    if GPUModelRunner is not None:
        aux["ids_v1_runner"] = GPUModelRunner._get_eagle3_aux_layers_from_config(
            type("Runner", (), {"speculative_config": spec})())
    if not aux["requires_aux_hidden_states"]:
        return
    with harness("building the target stand-in"):
        model = target_standin(target)
    with engine_stage(record, "config", ROOTS):
        set_eagle3_aux_hidden_state_layers(model, spec)
    layers = model.model.aux_hidden_state_layers
    aux["ids"] = list(layers)
    aux["capture_before_layer"] = captured_before_layers(layers, len(model.model.layers))


def read_config(record: dict, hf: Any, model: nn.Module | None) -> None:
    """The recorded config values, from the built model where it exists, else from vLLM's parsed config."""
    cfg = record["config"]
    for key in cfg:
        cfg[key] = getattr(hf, key, None)
    cfg["rope_theta"] = (getattr(hf, "rope_parameters", None) or {}).get("rope_theta")
    cfg["rope_scaling"] = getattr(hf, "rope_parameters", None)
    if model is None:
        return
    read_built_model(cfg, model)
    inner = model.model
    residual_norm = getattr(inner.layers[0], "_residual_norm", None)
    cfg["norm_before_residual"] = getattr(residual_norm, "__name__", None) == "_norm_before_residual"
    fc = getattr(inner, "fc", None)
    num_aux = getattr(inner, "num_aux_hidden_states", None) or getattr(inner, "num_aux_layers", None)
    if fc is not None and num_aux:
        cfg["num_aux"] = num_aux
        cfg["target_hidden_size"] = fc.input_size // num_aux
        cfg["fc_input_size"] = fc.input_size


def probing_load_weights(record: dict, checkpoint: Path):
    """A DefaultModelLoader.load_weights (model_loader/default_loader.py:490-511) that, between building the model
    and loading it, fills the parameters with sentinels and taps their loaders, then calls the original and reads
    the sentinels."""
    original = DefaultModelLoader.load_weights

    def load_weights(loader: DefaultModelLoader, model: nn.Module, model_config: ModelConfig) -> None:
        probe = LoadProbe(model, fused_shards, default_weight_loader)
        model_load_weights = model.load_weights
        # DefaultModelLoader hands the checkpoint's (name, tensor) stream to model.load_weights.
        model.load_weights = lambda weights: model_load_weights(probe.tag(weights))
        try:
            original(loader, model, model_config)
        finally:
            del model.load_weights
            with harness("reading the load"):
                probe.finish(record, checkpoint_tensor_names(checkpoint))

    return load_weights


def serve_with(model: nn.Module) -> dict[str, str]:
    """Which embedding and lm_head the drafter serves with: load_eagle_model shares the target's unless the drafter
    loaded its own (v1/worker/gpu/spec_decode/eagle/utils.py:18-34, 45-77, 107-119). A drafter's own copy equal to
    the target's is shared too; with no target here, the copies are taken to differ."""
    embed = _should_share(model, "has_own_embed_tokens", model.model.embed_tokens, None)
    head = _should_share(model, "has_own_lm_head", model.lm_head, None)
    return {"embed_tokens": "target.embed_tokens" if embed else "draft",
            "lm_head": "target.lm_head" if head else "draft"}


def draft_config(spec: SpeculativeConfig, vllm_config: VllmConfig) -> VllmConfig:
    """load_eagle_model's steps up to get_model (v1/worker/gpu/spec_decode/eagle/utils.py:80-95 in 0.33.0), as the
    installed release takes them. From 0.31.0 ``apply_draft_overrides`` then the draft load config; in 0.28.0 to
    0.30.0 the same overrides are made inline (utils.py:36-50 in 0.28.0, 73-109 in 0.30.0), each only when the
    speculative config sets the draft's own moe_backend, kv_cache_dtype or attention_backend, which no recording
    does."""
    if hasattr(spec, "apply_draft_overrides"):
        config = spec.apply_draft_overrides(vllm_config)
    else:
        stated = [f for f in ("moe_backend", "kv_cache_dtype", "attention_backend") if getattr(spec, f, None)]
        if stated:
            raise RuntimeError(f"harness: a draft override {stated} this recorder does not apply for this release")
        config = vllm_config
    load_config = config.load_config
    if get_draft_load_config is not None:
        load_config = get_draft_load_config(config)
    if get_pp_safe_draft_load_config is not None:
        load_config = get_pp_safe_draft_load_config(load_config)
    return config if load_config is config.load_config else replace(config, load_config=load_config)


def record_checkpoint(entry: dict, root: Path, record: dict) -> None:
    draft_dir = root / entry["dir"]
    with harness("reading the target config"):
        # --max-model-len, when the entry names a context (None: the target's, derived from its config)
        target = ModelConfig(model=str((root / entry["target_config"]).parent), skip_tokenizer_init=True,
                             dtype="bfloat16", enforce_eager=True, max_model_len=entry.get("context_length"))
    parallel = ParallelConfig()
    spec = None
    try:
        with engine_stage(record, "config", ROOTS):
            spec = SpeculativeConfig(method="eagle3", model=str(draft_dir),
                                     num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
                                     target_model_config=target, target_parallel_config=parallel)
            vllm_config = VllmConfig(model_config=target, speculative_config=spec, parallel_config=parallel,
                                     load_config=LoadConfig(), device_config=DeviceConfig(device="cpu"))
        record["config_architectures"] = list(spec.draft_model_config.architectures)
        read_aux(record, spec, target)
    finally:
        if spec is not None:
            read_config(record, spec.draft_model_config.hf_config, None)

    model = None
    try:
        with ExitStack() as stack, engine_stage(record, "load", ROOTS):
            stack.enter_context(set_current_vllm_config(vllm_config))
            stack.enter_context(mock.patch.object(DefaultModelLoader, "load_weights",
                                                  probing_load_weights(record, draft_dir)))
            record["architecture"] = get_model_cls(spec.draft_model_config).__name__  # what get_model builds
            draft_vllm_config = draft_config(spec, vllm_config)
            with set_model_tag("eagle_head"):
                model = get_model(vllm_config=draft_vllm_config, model_config=spec.draft_model_config)
    finally:
        read_config(record, spec.draft_model_config.hf_config, model)
    record["serves_with"] = serve_with(model)


# ----- the drafter's own compute (see _compute.py) -------------------------------------------------------------

def build_for_compute(entry: dict, root: Path) -> nn.Module:
    """The drafter built and loaded again, as record_checkpoint does, in float32 and with every CustomOp on its
    ``forward_native`` (``CompilationConfig(mode=NONE, custom_ops=["none"])``: model_executor/custom_op.py:179-192,
    269-305; with "all" the CPU platform's RoPE calls ``torch.ops._C.rotary_embedding``, which the CUDA wheel does
    not build). The recorded load above is the served one (bfloat16, sentinels); this build is left uninstrumented."""
    draft_dir = root / entry["dir"]
    target = ModelConfig(model=str((root / entry["target_config"]).parent), skip_tokenizer_init=True,
                         dtype="float32", enforce_eager=True, max_model_len=entry.get("context_length"))
    parallel = ParallelConfig()
    spec = SpeculativeConfig(method="eagle3", model=str(draft_dir), num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
                             target_model_config=target, target_parallel_config=parallel)
    vllm_config = VllmConfig(model_config=target, speculative_config=spec, parallel_config=parallel,
                             load_config=LoadConfig(), device_config=DeviceConfig(device="cpu"),
                             compilation_config=CompilationConfig(mode=CompilationMode.NONE, custom_ops=["none"]))
    with set_current_vllm_config(vllm_config), set_model_tag("eagle_head"):
        return get_model(vllm_config=draft_config(spec, vllm_config), model_config=spec.draft_model_config)


def fed_width(model: nn.Module, record: dict, entry: dict, root: Path) -> int:
    """How wide the state the proposer hands the drafter's combine_hidden_states is: fc's input where the drafter
    builds one (llama_eagle3.py:209-221); without one (eagle_config.use_aux_hidden_state false), the aux states the
    model runner captures all the same where it captures them (0.32.0: every eagle3 drafter, v1/worker/gpu/
    model_runner.py:299-307; the recording's aux), else the target's last hidden state (0.33.0: eagle3_utils.py)."""
    if getattr(model.model, "use_aux_hidden_state", True):
        return model.model.fc.input_size
    target = ModelConfig(model=str((root / entry["target_config"]).parent), skip_tokenizer_init=True,
                         dtype="float32", enforce_eager=True, max_model_len=entry.get("context_length"))
    aux = record.get("aux") or {}
    count = len(aux["ids"]) if aux.get("requires_aux_hidden_states") and aux.get("ids") else 1
    return count * target.get_hidden_size()


def standin_forward(standin: _compute.StandIn):
    """``Attention.forward`` (model_executor/layers/attention/attention.py:490-560) replaced by the stand-in, with
    the layer's own sizes (num_heads, num_kv_heads, head_size, head_size_v: attention.py:334-339) and softmax scale
    (its impl's, v1/attention/backends/cpu_attn.py:313). What the stand-in does not compute is refused."""
    def forward(self: Attention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                output_shape: Any = None, output_dtype: Any = None) -> torch.Tensor:
        impl = self.impl
        asks = {"a sliding window": self.sliding_window is not None, "attention sinks": self.has_sink,
                "a logit soft-cap": bool(getattr(impl, "logits_soft_cap", 0)),
                "ALiBi": getattr(impl, "alibi_slopes", None) is not None,
                f"attention type {self.attn_type}": self.attn_type != "decoder"}
        if any(asks.values()):
            raise _compute.CannotJudge("the attention stand-in does not compute "
                                       + ", ".join(k for k, v in asks.items() if v))
        out = standin.attend(self, query, key, value, self.num_heads, self.num_kv_heads, self.head_size,
                             self.head_size_v, impl.scale)
        return out.to(output_dtype or query.dtype)
    return forward


def standin_mla_forward(standin: _compute.StandIn):
    """``MLAAttention.forward`` (model_executor/layers/attention/mla_attention.py:829-898), which needs vLLM's MLA
    backend, its KV cache and a forward context, replaced by the stand-in on what the engine hands it: the roped q
    (num_heads, qk_nope + qk_rope), the normed latent ``kv_c_normed`` and the roped ``k_pe`` (layers/mla.py:244-250).
    As the engine's MHA path does (forward_mha, mla_attention.py:3248-3256), the layer's own ``kv_b_proj`` up-projects
    the latent to per-head [k_nope | v] and k is [k_nope | k_pe] (k_pe shared by every head, :2931); attention runs
    with the layer's own ``scale`` (head_dim^-0.5 x mscale^2, deepseek_v2.py:1129-1136). The absorbed decode path the
    engine takes for one-token steps (:1105-1165) computes the same product reassociated."""
    def forward(self: Any, q: torch.Tensor, kv_c_normed: torch.Tensor, k_pe: torch.Tensor,
                output_shape: Any = None, q_dcp_replicated: Any = None) -> torch.Tensor:
        asks = {"a sliding window": self.sliding_window is not None, "sparse attention (an indexer)":
                self.indexer is not None, "decode context parallelism": q_dcp_replicated is not None}
        if any(asks.values()):
            raise _compute.CannotJudge("the attention stand-in does not compute "
                                       + ", ".join(k for k, v in asks.items() if v))
        t, nh = q.shape[0], self.num_heads
        kv = self.kv_b_proj(kv_c_normed)[0].view(t, nh, self.qk_nope_head_dim + self.v_head_dim)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.view(t, 1, self.qk_rope_head_dim).expand(t, nh, self.qk_rope_head_dim)], dim=-1)
        head = self.qk_nope_head_dim + self.qk_rope_head_dim
        out = standin.attend(self, q.reshape(t, nh * head), k.reshape(t, nh * head), v.reshape(t, -1), nh, nh, head,
                             self.v_head_dim, self.scale)
        return out.to(q.dtype)
    return forward


def run_compute(model: nn.Module, inputs: dict, steps: int) -> tuple[list, list, list]:
    """K draft steps of the drafter, as vLLM's proposer drives it (v1/spec_decode/llm_base_proposer.py, the V1
    proposer a CPU host runs; the V2 runner's speculator.py:210-216, 433-437, 485-488, 935-946 does the same):
    step 0 gets ``combine_hidden_states`` of the target's aux states (:549; llama_eagle3.py:397-418), the token ids
    and positions; the model returns (normed, fed) (:599-604; llama_eagle3.py:283-288: the fed state is the pre-norm
    one, or the normed one under norm_output); ``compute_logits`` maps the normed state to target-vocabulary logits
    (:484; llama_eagle3.py:373-395); each later step gets the fed state of the same row (:642, 720), the drafted
    token (:690) and the position + 1 (:697-703)."""
    standin = _compute.StandIn()
    ids, positions = inputs["input_ids"], inputs["position_ids"]
    later = inputs.get("later_tokens")
    logits, fed, tokens = [], [], []
    with mock.patch.object(Attention, "forward", standin_forward(standin)), \
            mock.patch.object(MLAAttention, "forward", standin_mla_forward(standin)), torch.no_grad():
        hidden = model.combine_hidden_states(inputs["aux_hidden_states"].float())
        for step in range(steps):
            standin.step = step
            normed, state = model(input_ids=ids, positions=positions + step, hidden_states=hidden)
            out = model.compute_logits(normed)
            nxt = out.argmax(-1) if later is None else later[step] if step < len(later) else out.argmax(-1)
            logits.append(out)
            fed.append(state)
            tokens.append(nxt)
            ids, hidden = nxt, state
    return logits, fed, tokens


def compute_checkpoint(entry: dict, root: Path, record: dict) -> dict:
    """The drafter's own compute on the entry's inputs (its ``compute_inputs`` file, else the seeded ones), or why
    there is none."""
    out: dict[str, Any] = {"checkpoint": entry["name"], "source_hash": entry["source_hash"]}
    if record.get("refused") or "harness_error" in record:
        out["not_computed"] = "the engine did not build and load the drafter"
        return out
    model = None
    gc.collect()  # the recorded (served, bfloat16) build goes first: only one build is held at a time
    try:
        if Attention is None or CompilationConfig is None:
            raise _compute.CannotJudge(f"the recorder does not know vLLM {VERSION}'s attention layers or "
                                       "compilation config")
        model = build_for_compute(entry, root)
        poisoned = _compute.poison_unwritten(model, record)
        if poisoned:
            out["unwritten"] = _compute.few(poisoned)
        shared = serve_with(model)
        if shared["lm_head"] != "draft":
            raise _compute.CannotJudge("the drafter serves with the target's lm_head, which the recorder does not have")
        width = fed_width(model, record, entry, root)
        embed_shared = shared["embed_tokens"] != "draft"  # load_eagle_model shares the target's (eagle/utils.py:45-77)
        for inputs, full_path in _compute.inputs_of(entry, root, width, model.config.vocab_size,
                                                    model.config.hidden_size if embed_shared else None):
            if embed_shared:
                if "embed_table" not in inputs:
                    raise _compute.CannotJudge("the drafter serves with the target's embedding, and none was given")
                model.model.embed_tokens.weight.data = inputs["embed_table"].float()
            _compute.note_inputs(out, inputs)
            logits, fed, tokens = run_compute(model, inputs, int(entry.get("compute_steps", _compute.STEPS)))
            _compute.keep(out, inputs, logits, fed, tokens, full_path)
    except _compute.CannotJudge as exc:
        out["cannot_judge"] = str(exc)
    except ImportError as exc:  # the release keeps what the recorder drives elsewhere: no verdict
        out["cannot_judge"] = f"the recorder does not know {ENGINE} {VERSION}'s internals: {exc}"
    except Exception as exc:  # the engine's own code raised while computing: what a server would do on a request
        out["raised"] = {"type": type(exc).__name__, "message": (str(exc) or repr(exc))[:2000],
                         "at": _engine_frame(exc, ROOTS)}
    finally:
        del model
        gc.collect()
    return out


def init_process_group() -> None:
    """One-process gloo group, as a single-GPU server has (tensor and pipeline parallel size 1)."""
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{free_port()}")
        initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


def declare_missing_cpu_ops() -> Any:
    """See the module docstring: declares ``_C::silu_and_mul`` (no kernel) where the release's activation binds it
    and no library provides it. Returns the library (kept alive while recording), or None."""
    try:
        torch.ops._C.silu_and_mul  # noqa: B018  (a lookup: raises when no library registered the op)
        return None
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("silu_and_mul(Tensor! result, Tensor input) -> ()")
    return lib


def triton_check_stub(stack: ExitStack) -> None:
    """From 0.34.0 the CPU platform refuses any VllmConfig on an x86 machine whose Triton has no CPU backend
    (platforms/cpu.py:237-243, "vLLM on x86 CPUs requires Triton (triton-cpu)"), where 0.33.0 only warned
    (platforms/cpu.py:242-244): a requirement of the CPU model runner's kernels, which recording never runs. On such a
    release the check is told Triton is there (vllm.triton_utils.HAS_TRITON, read at the call)."""
    import vllm.triton_utils as triton_utils

    if not triton_utils.HAS_TRITON and tuple(int(x) for x in VERSION.split(".")[:2]) >= (0, 34):
        stack.enter_context(mock.patch.object(triton_utils, "HAS_TRITON", True))


def main(argv: list[str]) -> int:
    argv, compute = _compute.compute_option(argv)
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    torch.manual_seed(0)
    declared = declare_missing_cpu_ops()  # noqa: F841  (the library must outlive the recording)
    platform = ExitStack()
    triton_check_stub(platform)
    init_process_group()
    # load_model calls gc.collect() twice per checkpoint (model_loader/base_loader.py); with vLLM's imports in the
    # heap that is ~1 s each. Freezing what exists now leaves only each checkpoint's own objects to collect.
    gc.freeze()
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(layer_utils, "dispatch_cpu_unquantized_gemm", keep_weights_gemm))
        if not torch.accelerator.is_available():  # see the module docstring
            stack.enter_context(mock.patch.object(torch.accelerator, "empty_cache", lambda: None))
        record_one = _compute.computing(record_checkpoint, compute_checkpoint, compute)
        code = run_all(Path(argv[0]), Path(argv[1]), ENGINE, VERSION, record_one, STARTED)
    _compute.write(compute, ENGINE, VERSION, STARTED)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
