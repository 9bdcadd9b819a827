"""Record how SGLang reads each conformance checkpoint, running SGLang's own config and loading code on CPU.

    python record_sglang.py MANIFEST OUT_DIR      # inside a virtualenv with sglang 0.5.14, or 0.5.20 to 0.5.23

The steps below cite the 0.5.23 wheel; where 0.5.14 and 0.5.20 to 0.5.22 take other steps to the same place, the
feature-detected branches after the imports say which and cite those releases.

For each checkpoint of MANIFEST (written by conformance/checkpoints.py), the path a server takes, up to the point
where a GPU would be needed (paths: sglang/srt/ in the 0.5.23 wheel):

1. config: ``ServerArgs(speculative_algorithm="EAGLE3", device="cpu")`` published as the scheduler's runtime
   context (managers/scheduler.py:6327-6335), the target's ``ModelConfig``, then the draft ``ModelConfig`` the
   draft worker builds with the target's context length (managers/tp_worker.py:465-482,
   speculative/eagle_worker_v2.py:222-232);
2. aux ids: ``resolve_spec_aux_hidden_state_config`` for the target runner
   (model_executor/model_runner_components/spec_aux_hidden_state.py:53-81), whose ids go to the target class's
   ``set_eagle3_layers_to_capture`` (attention_backend_setup.py:40-61), run here on a stand-in of that class;
3. load: the draft runner's load config (model_runner.py:1285-1296) and ``get_model`` (model_loader/__init__.py:23-33),
   i.e. ``DefaultModelLoader`` building the drafter class and calling its ``load_weights``; then the worker's
   embedding / lm_head sharing (eagle_worker_v2.py:336-365) against a stand-in target embedding and lm_head.

The harness observes, it does not steer: ``DefaultModelLoader.load_weights_only`` is wrapped to sentinel-fill the
freshly built model and tap its parameters' weight loaders (see _probe.py) before calling the original. One stub
replaces engine code (and ``serve_with`` makes ``torch.cuda.synchronize`` a no-op after the MLA drafter's embedding
swap on a machine without CUDA, see there, as the compute does after 0.5.14's Llama embedding swap):

* ``sglang.srt.layers.rotary_embedding.base._is_cpu`` is set to True. It is computed at import from
  ``SGLANG_USE_CPU_ENGINE`` (utils/common.py:221-224); when false, every rotary embedding built off CUDA imports
  ``vllm._custom_ops`` for a fallback kernel (layers/rotary_embedding/base.py:121-141), and vLLM is not installed
  beside SGLang. Setting the whole CPU engine on instead would also switch weight post-processing to AMX kernels
  the CUDA wheel does not ship; only the rotary layer is told.
"""

from __future__ import annotations

import gc
import inspect
import json
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib.metadata import version as package_version
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

STARTED = time.time()
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The engines' imports stay in the order the recordings were made with (torch, the probe, then the engine).
# isort: off
import torch  # noqa: E402
from torch import nn  # noqa: E402

from _probe import (LoadProbe, Refused, _engine_frame, checkpoint_tensor_names, engine_stage,  # noqa: E402
                    free_port, harness, read_built_model, run_all)
import _compute  # noqa: E402

import sglang.srt.layers.rotary_embedding.base as rotary_base  # noqa: E402
from sglang.srt.configs.device_config import DeviceConfig  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear  # noqa: E402
from sglang.srt.model_loader import get_model  # noqa: E402
from sglang.srt.model_loader.loader import DefaultModelLoader  # noqa: E402
from sglang.srt.model_loader.utils import get_model_architecture  # noqa: E402
from sglang.srt.model_loader.weight_utils import default_weight_loader  # noqa: E402
from sglang.srt.models.registry import ModelRegistry  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

# What the recorded releases do otherwise, feature-detected, each branch citing the release it follows (paths in
# that release's wheel). 0.5.20 to 0.5.23 publish config bags from the process entry; 0.5.14 keeps one global
# ServerArgs, set by ModelRunner.__init__ (model_runner.py:526), which llama_eagle3.py:261 reads.
try:
    from sglang.srt.runtime_context import get_model as get_model_bag, publish
    set_global_server_args_for_scheduler = None
except ImportError:
    from sglang.srt.server_args import set_global_server_args_for_scheduler
    get_model_bag = publish = None
try:  # 0.5.23: publish takes the launcher's placement (runtime_context.py:230-242)
    from sglang.srt.runtime_context import SpawnRanks
except ImportError:  # 0.5.20 to 0.5.22: ranks are read from the process groups (0.5.20 runtime_context.py:373-395)
    SpawnRanks = None
try:  # 0.5.23 (distributed/bootstrap.py:90-160)
    from sglang.srt.distributed.bootstrap import init_parallel_runtime
except ImportError:
    init_parallel_runtime = None
try:  # 0.5.20 (distributed/bootstrap.py:70-172, called at model_runner.py:1144-1153)
    from sglang.srt.distributed.bootstrap import init_torch_distributed
except ImportError:  # 0.5.14: the steps of ModelRunner.init_torch_distributed (model_runner.py:1145-1288)
    init_torch_distributed = None
try:  # 0.5.20 on (model_runner_components/load_model_utils.py:195-235 in 0.5.20)
    from sglang.srt.model_executor.model_runner_components.load_model_utils import build_load_config
except ImportError:  # 0.5.14: ModelRunner.load_model builds the LoadConfig inline (model_runner.py:1368-1384)
    build_load_config = None
try:  # 0.5.20 on (model_runner_components/spec_aux_hidden_state.py:49-125 in 0.5.20)
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config)
except ImportError:  # 0.5.14: inline in ModelRunner.__init__ (model_runner.py:435-472)
    resolve_spec_aux_hidden_state_config = None
# isort: on

ENGINE = "sglang"
VERSION = package_version("sglang")
ROOTS = ("sglang", "transformers")  # packages whose frames locate a refusal
NUM_SPECULATIVE_TOKENS = 3
# Targets whose model forward also captures after the last layer (0.5.23 gpt_oss.py:730-737, 0.5.20 :739-757); the
# others capture only the input of layer i for i in range(start_layer, end_layer) (llama.py:485-494,
# qwen2.py:455-464, deepseek_v2.py:3190-3196). 0.5.14's GPT-OSS captures layer inputs only (gpt_oss.py:692-697).
CAPTURES_STACK_OUTPUT = {"GptOssForCausalLM"} if init_torch_distributed or init_parallel_runtime else set()
# DefaultModelLoader's staticmethod that loads a built model: load_weights_only from 0.5.20 on (0.5.23
# loader.py:1032-1063); 0.5.14 has load_weights_and_postprocess (loader.py:771-823), which also runs
# process_weights_after_loading, a no-op for unquantized layers off the CPU engine (quantization/unquant.py:135-137)
LOAD_HOOK = "load_weights_only" if hasattr(DefaultModelLoader, "load_weights_only") else \
    "load_weights_and_postprocess"
# the draft worker states the target's context (0.5.20 tp_worker.py:464-478); 0.5.14's ModelConfig.from_server_args
# has no such parameter: EAGLEWorkerV2 sets server_args.context_length first (eagle_worker_v2.py:964-965)
DRAFT_TAKES_CONTEXT = "context_length" in inspect.signature(ModelConfig.from_server_args).parameters


def publish_scheduler(args: ServerArgs) -> None:
    """The scheduler's context: 0.5.23 with its placement (managers/scheduler.py:6327-6335), 0.5.20 to 0.5.22 without
    (0.5.20 scheduler.py:5808), 0.5.14 the global ServerArgs (model_runner.py:526)."""
    if publish is None:
        set_global_server_args_for_scheduler(args)
    elif SpawnRanks is None:
        publish(args, role="scheduler")
    else:
        publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))


def draft_model_config(args: ServerArgs, draft_dir: Path, target: ModelConfig) -> ModelConfig:
    """The draft ModelConfig the draft worker builds, with the target's context length."""
    if DRAFT_TAKES_CONTEXT:
        return ModelConfig.from_server_args(args, model_path=str(draft_dir), is_draft_model=True,
                                            context_length=target.context_len)
    saved, args.context_length = args.context_length, target.context_len
    try:
        return ModelConfig.from_server_args(args, model_path=str(draft_dir), is_draft_model=True)
    finally:  # the target runner's aux step sees the user's --context-length (0.5.14 model_runner.py:441-446)
        args.context_length = saved


def aux_config(args: ServerArgs, target: ModelConfig) -> Any:
    """The target runner's aux-state config: resolve_spec_aux_hidden_state_config from 0.5.20 on; 0.5.14's inline
    steps of ModelRunner.__init__ (model_runner.py:435-472), the draft config built as there (:441-446)."""
    if resolve_spec_aux_hidden_state_config is not None:
        return resolve_spec_aux_hidden_state_config(server_args=args, model_config=target,
                                                    spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)
    out = SimpleNamespace(eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None)
    if not args.speculative_draft_model_path:
        return out
    draft = ModelConfig.from_server_args(args, model_path=args.speculative_draft_model_path,
                                         model_revision=args.speculative_draft_model_revision, is_draft_model=True)
    out.eagle_use_aux_hidden_state = True
    try:  # a bare except in 0.5.14 (:465-472): no eagle_config means default ids
        eagle_config = getattr(draft.hf_config, "eagle_config", None)
        out.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
        out.eagle_aux_hidden_state_layer_ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
    except Exception:
        out.eagle_aux_hidden_state_layer_ids = None
    return out


def load_config_for(args: ServerArgs) -> Any:
    """The draft runner's LoadConfig: build_load_config from 0.5.20 on (with the weight-cache bag where published),
    0.5.14's inline construction in ModelRunner.load_model (model_runner.py:1368-1384)."""
    if build_load_config is not None:
        bag = get_model_bag()
        return build_load_config(
            server_args=args, tp_rank=0, remote_instance_weight_transporter_engine=None,
            remote_instance_weight_transporter_session_id="", draft_model_idx=None,
            weight_cache_mode=bag.weight_cache_mode, weight_cache_socket=bag.weight_cache_socket)
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.modelopt_config import ModelOptConfig

    s = args
    return LoadConfig(
        load_format=s.load_format, download_dir=s.download_dir, model_loader_extra_config=s.model_loader_extra_config,
        tp_rank=0, remote_instance_weight_loader_seed_instance_ip=s.remote_instance_weight_loader_seed_instance_ip,
        remote_instance_weight_loader_seed_instance_service_port=(
            s.remote_instance_weight_loader_seed_instance_service_port),
        remote_instance_weight_loader_send_weights_group_ports=s.remote_instance_weight_loader_send_weights_group_ports,
        remote_instance_weight_loader_backend=s.remote_instance_weight_loader_backend,
        remote_instance_weight_loader_transfer_engine=None,
        remote_instance_weight_loader_transfer_engine_session_id="",
        modelexpress_url=s.modelexpress_url, modelexpress_transport=s.modelexpress_transport,
        modelopt_config=ModelOptConfig(
            quant=s.modelopt_quant, checkpoint_restore_path=s.modelopt_checkpoint_restore_path,
            checkpoint_save_path=s.modelopt_checkpoint_save_path, export_path=s.modelopt_export_path,
            quantize_and_serve=s.quantize_and_serve),
        rl_quant_profile=s.rl_quant_profile, draft_model_idx=None)


def fused_shards(module: nn.Module) -> list[tuple[Any, int]] | None:
    """Rows of each shard of a fused weight (tensor parallel size 1): QKVParallelLinear's q/k/v
    (layers/linear.py:1155-1159), MergedColumnParallelLinear's 0, 1, ... (layers/linear.py:690)."""
    if isinstance(module, QKVParallelLinear):
        return list(zip(("q", "k", "v"), module.output_sizes, strict=True))
    if isinstance(module, MergedColumnParallelLinear):
        return list(enumerate(module.output_sizes))
    return None


def server_args(target_dir: Path, draft_dir: Path, context_length: int | None = None,
                dtype: str = "bfloat16") -> ServerArgs:
    """``context_length``: ``--context-length`` (None: the target's, derived from its config)."""
    return ServerArgs(model_path=str(target_dir), speculative_algorithm="EAGLE3",
                      speculative_draft_model_path=str(draft_dir), speculative_num_steps=NUM_SPECULATIVE_TOKENS,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=NUM_SPECULATIVE_TOKENS + 1,
                      device="cpu", skip_tokenizer_init=True, dtype=dtype, context_length=context_length)


def _standin(cls: type, config: Any, layers: Any) -> nn.Module:
    """An instance of a real model class with only what set_eagle3_layers_to_capture reads: config, the pipeline
    group and a decoder holding layers_to_capture (building the real target would load a full model)."""
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.config, model.pp_group, model.model = config, get_parallel().pp_group, layers
    return model


def target_standin(target: ModelConfig) -> tuple[nn.Module, SimpleNamespace]:
    """(stand-in target, the decoder stand-in whose layers_to_capture the target sets). A multimodal target
    delegates to a language model (kimi_k25.py:693, 928-939), which is the same kind of stand-in."""
    cls, _ = ModelRegistry.resolve_model_cls(target.hf_config.architectures)
    layers = SimpleNamespace(layers_to_capture=[])
    # MoE targets hand the ids to their decoder (0.5.23 qwen3_moe.py:1128-1143 -> qwen2_moe.py:1153-1156), which
    # stores them and flags those layers: the stand-in decoder stores them
    layers.set_eagle3_layers_to_capture = lambda ids: setattr(layers, "layers_to_capture", list(ids))
    text = target.hf_text_config
    if text is target.hf_config:
        return _standin(cls, text, layers), layers
    inner_cls, _ = ModelRegistry.resolve_model_cls(text.architectures)
    model = _standin(cls, target.hf_config, SimpleNamespace())
    model.language_model = _standin(inner_cls, text, layers)
    return model, layers


def captured_before_layers(cls_name: str, layers_to_capture: list[int], num_layers: int) -> list[int]:
    """The target layers whose input is captured (num_layers: the stack's output, where the class captures it)."""
    last = num_layers if cls_name in CAPTURES_STACK_OUTPUT else num_layers - 1
    return sorted({i for i in layers_to_capture if 0 <= i <= last})


def read_aux(record: dict, args: ServerArgs, target: ModelConfig) -> None:
    with engine_stage(record, "config", ROOTS):
        resolved = aux_config(args, target)
    aux = record["aux"]
    aux["requires_aux_hidden_states"] = resolved.eagle_use_aux_hidden_state
    aux["ids_in_config"] = resolved.eagle_aux_hidden_state_layer_ids
    if not resolved.eagle_use_aux_hidden_state:
        return
    with harness("building the target stand-in"):
        model, layers = target_standin(target)
    with engine_stage(record, "config", ROOTS):
        model.set_eagle3_layers_to_capture(resolved.eagle_aux_hidden_state_layer_ids)
    aux["ids"] = resolved.eagle_aux_hidden_state_layer_ids  # None: the target class picks its defaults
    aux["layers_to_capture"] = list(layers.layers_to_capture)
    aux["capture_before_layer"] = captured_before_layers(
        type(model).__name__, layers.layers_to_capture, target.hf_text_config.num_hidden_layers)


def read_config(record: dict, hf: Any, model: nn.Module | None) -> None:
    """The recorded config values, from the built model where it exists, else from SGLang's parsed config."""
    cfg = record["config"]
    for key in cfg:
        cfg[key] = getattr(hf, key, None)
    rope = getattr(hf, "rope_parameters", None) or {}
    cfg["rope_theta"] = rope.get("rope_theta", getattr(hf, "rope_theta", None))
    cfg["rope_scaling"] = rope or getattr(hf, "rope_scaling", None)
    if model is None:
        return
    read_built_model(cfg, model)
    inner = model.model
    # No norm_before_residual: layer 0's residual is the fc output before hidden_norm (llama_eagle3.py:97-99).
    cfg["norm_before_residual"] = False
    cfg["num_aux"] = getattr(inner, "num_aux_hidden_states", None)
    cfg["target_hidden_size"] = getattr(inner, "hidden_size_in", None)
    fc = getattr(inner, "fc", None)
    if fc is not None:
        cfg["fc_input_size"] = getattr(fc, "in_features", None) or getattr(fc, "input_size", None)


def probing_load_weights_only(record: dict, checkpoint: Path):
    """A DefaultModelLoader.load_weights_only (model_loader/loader.py:1032-1063) that, between building the model
    and loading it, fills the parameters with sentinels and taps their loaders, then calls the original and reads
    the sentinels. d2t is not a parameter in SGLang: load_weights turns it into the hot_token_id attribute
    (llama_eagle3.py:350-353), recorded as such."""
    original = getattr(DefaultModelLoader, LOAD_HOOK)

    def load_weights_only(model: nn.Module, weights: Any, target_device: torch.device) -> None:
        probe = LoadProbe(model, fused_shards, default_weight_loader)
        names = checkpoint_tensor_names(checkpoint)
        try:
            original(model, probe.tag(weights), target_device)
        finally:
            with harness("reading the load"):
                probe.finish(record, names)
                read_hot_token_id(record, model, names)

    return staticmethod(load_weights_only)


def read_hot_token_id(record: dict, model: nn.Module, names: list[str]) -> None:
    """Record d2t's way into the hot_token_id attribute: the last tensor whose name contains "d2t" sets it
    (llama_eagle3.py:350-353); an attribute never set is listed unwritten like a parameter."""
    hot = getattr(model, "hot_token_id", None)
    if hot is None:
        record["unwritten"].append({"param": "hot_token_id", "shard": None, "role": "d2t", "attribute": True})
        return
    source = [n for n in names if "d2t" in n][-1]
    record["loaded"][source] = [{"param": "hot_token_id", "shard": None, "shape": list(hot.shape),
                                 "param_shape": list(hot.shape), "narrowed": False, "attribute": True}]
    record["loaded"] = dict(sorted(record["loaded"].items()))
    record["ignored"] = [n for n in record["ignored"] if n != source]


def no_cuda_sync() -> Any:
    """``torch.cuda.synchronize`` a no-op where there is no CUDA driver (see serve_with: the stub after an embedding
    swap)."""
    return mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: None) if not torch.cuda.is_available() \
        else ExitStack()


def serve_with(model: nn.Module, target: ModelConfig) -> dict[str, str]:
    """Run the worker's embedding / lm_head sharing (eagle_worker_v2.py:336-365) with stand-in target tensors,
    and say which tensors the drafter then serves with. The MLA drafter's set_embed / set_embed_and_head end with
    ``torch.cuda.empty_cache(); torch.cuda.synchronize()`` (models/kimi_k25_eagle3.py:413-414, 421-422): device
    housekeeping after the swap, which raises without a CUDA driver; on a machine without one, synchronize is a no-op
    here (the second stub, confined to this call: the tensors are swapped before it)."""
    text = target.hf_text_config
    embed = torch.empty(text.vocab_size, text.hidden_size)
    head = torch.empty(text.vocab_size, text.hidden_size)
    with no_cuda_sync():
        if getattr(model, "load_lm_head_from_target", False):
            model.set_embed_and_head(embed, head)
        else:
            model.set_embed(embed)

    def which(weight: torch.Tensor) -> str:
        return "target.embed_tokens" if weight is embed else "target.lm_head" if weight is head else "draft"

    return {"embed_tokens": which(model.model.embed_tokens.weight), "lm_head": which(model.lm_head.weight)}


@contextmanager
def cpu_only_refusals(record: dict) -> Iterator[None]:
    """Mark a refusal that only the CPU device causes. The MLA drafter builds its rotary embedding through
    get_rope_wrapper(device=the server's device) (models/deepseek_v2.py:2167-2175), which on "cpu" takes
    get_rope_cpu, a deepseek_yarn-only factory (layers/rotary_embedding/factory.py:443-513); a GPU server takes
    get_rope. Such a refusal is recorded, and flagged as not what a GPU server would do."""
    try:
        yield
    except Refused as refused:
        frames = traceback.extract_tb(refused.__cause__.__traceback__)
        if any(frame.name == "get_rope_cpu" for frame in frames):
            record["refused"]["cpu_only"] = "get_rope_cpu: the rotary factory SGLang uses only for device cpu"
        raise


def record_checkpoint(entry: dict, root: Path, record: dict) -> None:
    draft_dir = root / entry["dir"]
    target_dir = (root / entry["target_config"]).parent
    draft = None
    try:
        with engine_stage(record, "config", ROOTS):
            args = server_args(target_dir, draft_dir, entry.get("context_length"))
            publish_scheduler(args)
            target = ModelConfig.from_server_args(args)
            draft = draft_model_config(args, draft_dir, target)
        read_aux(record, args, target)
    finally:
        if draft is not None:
            read_config(record, draft.hf_config, None)

    model = None
    try:
        with cpu_only_refusals(record), ExitStack() as stack, engine_stage(record, "load", ROOTS):
            stack.enter_context(mock.patch.object(DefaultModelLoader, LOAD_HOOK,
                                                  probing_load_weights_only(record, draft_dir)))
            record["architecture"] = get_model_architecture(draft)[0].__name__  # what get_model builds
            model = get_model(model_config=draft, load_config=load_config_for(args),
                              device_config=DeviceConfig("cpu", 0))
            record["serves_with"] = serve_with(model, target)
    finally:
        if draft is not None:
            read_config(record, draft.hf_config, model)


# ----- the drafter's own compute (see _compute.py) -------------------------------------------------------------

def build_for_compute(entry: dict, root: Path) -> nn.Module:
    """The drafter built and loaded again as record_checkpoint does, in float32 (the rotary cos/sin cache is cast to
    the model dtype on CPU, layers/rotary_embedding/base.py:119-120), uninstrumented."""
    draft_dir = root / entry["dir"]
    args = server_args((root / entry["target_config"]).parent, draft_dir, entry.get("context_length"), "float32")
    publish_scheduler(args)
    target = ModelConfig.from_server_args(args)
    draft = draft_model_config(args, draft_dir, target)
    return get_model(model_config=draft, load_config=load_config_for(args), device_config=DeviceConfig("cpu", 0))


def standin_forward(standin: _compute.StandIn):
    """``RadixAttention.forward`` (layers/radix_attention.py:114) replaced by the stand-in, with the layer's own
    sizes (tp_q_head_num, tp_k_head_num, head_dim, v_head_dim) and softmax scale (``scaling``,
    radix_attention.py:80-89). What the stand-in does not compute is refused."""
    from sglang.srt.layers.radix_attention import AttentionType

    def forward(self: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, forward_batch: Any,
                save_kv_cache: bool = True, *args: Any, **kwargs: Any) -> torch.Tensor:
        asks = {"a sliding window": (self.sliding_window_size or -1) != -1, "a logit cap": bool(self.logit_cap),
                "cross attention": self.is_cross_attention, "iRoPE": self.use_irope,
                f"attention type {self.attn_type}": self.attn_type != AttentionType.DECODER,
                "a temperature scaling": getattr(self, "xai_temperature_len", -1) > 0,
                f"positions encoded as {self.pos_encoding_mode}": self.pos_encoding_mode != "NONE",
                "extra inputs " + ", ".join(kwargs): bool(kwargs)}
        if any(asks.values()):
            raise _compute.CannotJudge("the attention stand-in does not compute "
                                       + ", ".join(k for k, v in asks.items() if v))
        return standin.attend(self, q, k, v, self.tp_q_head_num, self.tp_k_head_num, self.qk_head_dim,
                              self.v_head_dim, self.scaling).to(q.dtype)
    return forward


def draft_batch(mode: Any, ids: torch.Tensor, positions: torch.Tensor, spec_info: Any) -> Any:
    """A ForwardBatch with the fields the drafter's forward reads (its 7 required ones, the positions, the spec
    info carrying the hidden states, capture LAST, no logprobs): ``mode`` EXTEND (the draft extend after prefill,
    speculative/eagle_worker_v2.py:961-1090) or DECODE (a draft step, :800-892)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

    t = ids.shape[0]
    batch = ForwardBatch(forward_mode=mode, batch_size=t, input_ids=ids, req_pool_indices=torch.arange(t),
                         seq_lens=torch.ones(t, dtype=torch.int64), out_cache_loc=torch.arange(t), seq_lens_sum=t)
    batch.positions, batch.spec_info = positions, spec_info
    batch.capture_hidden_mode, batch.return_logprob = CaptureHiddenMode.LAST, False
    return batch


def run_compute(model: nn.Module, inputs: dict, steps: int, vocab: int) -> tuple[list, list, list]:
    """K draft steps as SGLang's EAGLE worker drives the drafter (speculative/eagle_worker_v2.py): step 0 a draft
    extend whose spec info holds the target's aux states (EagleDraftExtendInput, :961-1090), each later step a draft
    decode fed the captured state (``spec_info.hidden_states``, :831, from ``logits_output.hidden_states``, :892 and
    :1086), the drafted token mapped to a target id through ``hot_token_id`` (:890-891, the draft id's argmax,
    :872-876) and the position + 1 (:876). The model is the engine's own (models/llama_eagle3.py:209-269, fc applied
    where the state is not the hidden size wide, :237-247; the captured state normed under norm_output, :266-268);
    logits and the captured state of every row come from its LogitsProcessor in DECODE mode (no last-token pruning,
    layers/logits_processor.py:539, 853), and are scattered to the target vocabulary at hot_token_id (-inf elsewhere)
    for the record."""
    from sglang.srt.layers.logits_processor import LogitsMetadata
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput

    standin = _compute.StandIn()
    ids, positions = inputs["input_ids"], inputs["position_ids"]
    later = inputs.get("later_tokens")
    hot = model.hot_token_id
    logits, fed, tokens = [], [], []
    forced = torch_ops(model)
    try:
        with mock.patch.object(RadixAttention, "forward", standin_forward(standin)), torch.no_grad():
            hidden = inputs["aux_hidden_states"].float()
            for step in range(steps):
                standin.step = step
                if step == 0:
                    batch = draft_batch(ForwardMode.EXTEND, ids, positions, EagleDraftExtendInput(hidden_states=hidden))
                else:
                    spec = EagleDraftInput(hidden_states=hidden)
                    batch = draft_batch(ForwardMode.DECODE, ids, positions + step, spec)
                normed, aux = model.model(ids, batch.positions, batch)
                out = model.logits_processor(ids, normed, model.lm_head, LogitsMetadata(
                    forward_mode=ForwardMode.DECODE, capture_hidden_mode=CaptureHiddenMode.LAST), aux)
                draft = out.next_token_logits
                targets = torch.arange(draft.shape[-1]) if hot is None else hot.to(torch.int64)
                full_logits = draft.new_full((draft.shape[0], vocab), float("-inf"))
                full_logits[:, targets] = draft
                drafted = targets[draft.argmax(-1)]
                nxt = later[step] if later is not None and step < len(later) else drafted
                logits.append(full_logits)
                fed.append(out.hidden_states)
                tokens.append(nxt)
                ids, hidden = nxt, out.hidden_states
    finally:
        if forced is not None:
            forced()
    return logits, fed, tokens


def torch_ops(model: nn.Module) -> Any:
    """Every fused op of the drafter on its ``forward_native``, and how to undo that (None: nothing to undo). From
    0.5.20 on, one process-wide backend (kernels/fused_op.py:640-660 in 0.5.23, :222-245 in 0.5.20). 0.5.14 has no
    such switch: each op picks its forward when built (layers/utils/multi_platform.py:36-38, 109-133), forward_native
    off CUDA, off the CPU engine (SGLANG_USE_CPU_ENGINE, utils/common.py:204-206) and off AMX; an op that picked
    another forward is not judged."""
    try:
        from sglang.kernels.fused_op import get_fused_op_backend, set_fused_op_backend
        from sglang.kernels.spec import KernelBackend
    except ImportError:
        from sglang.srt.layers.utils.multi_platform import MultiPlatformOp

        other = sorted({type(m).__name__ for m in model.modules() if isinstance(m, MultiPlatformOp)
                        and getattr(m._forward_method, "__func__", None) is not type(m).forward_native})
        if other:
            raise _compute.CannotJudge(f"{', '.join(other)} built on another forward than forward_native") from None
        return None
    forced = get_fused_op_backend()
    set_fused_op_backend(KernelBackend.TORCH)
    return lambda: set_fused_op_backend(forced)


def compute_checkpoint(entry: dict, root: Path, record: dict) -> dict:
    """The drafter's own compute on the entry's inputs (its ``compute_inputs`` files, else the seeded ones), or why
    there is none. The worker replaces the drafter's embedding by the target's (``set_embed``, eagle_worker_v2.py:
    353-363; llama.py:910-918 keeps the drafter's own where target_hidden_size differs): the inputs' embedding table
    stands in for the target's."""
    out: dict[str, Any] = {"checkpoint": entry["name"], "source_hash": entry["source_hash"]}
    if record.get("refused") or "harness_error" in record:
        out["not_computed"] = "the engine did not build and load the drafter"
        return out
    model = None
    gc.collect()  # the recorded (served, bfloat16) build goes first: only one build is held at a time
    try:
        model = build_for_compute(entry, root)
        if not hasattr(model.model, "layers") or not hasattr(model, "logits_processor"):
            raise _compute.CannotJudge(f"{type(model).__name__}: an MLA drafter, whose attention this recorder does "
                                       "not drive yet")
        if getattr(model, "load_lm_head_from_target", False):
            raise _compute.CannotJudge("the drafter serves with the target's lm_head, which the recorder does not have")
        poisoned = _compute.poison_unwritten(model, record)
        if poisoned:
            out["unwritten"] = _compute.few(poisoned)
        cfg = model.config
        width = model.model.fc.in_features if getattr(model.model, "fc", None) is not None else cfg.hidden_size
        own_embed = model.model.embed_tokens.weight
        for inputs, full_path in _compute.inputs_of(entry, root, width, cfg.vocab_size, cfg.hidden_size):
            table = nn.Parameter(inputs["embed_table"].float(), requires_grad=False) if "embed_table" in inputs \
                else own_embed
            with no_cuda_sync():  # 0.5.14's Llama set_embed ends with torch.cuda.synchronize() (llama.py:793-807)
                model.set_embed(table)
            if model.model.embed_tokens.weight is not table:  # set_embed kept the drafter's own (llama.py:910-916)
                inputs = {k: v for k, v in inputs.items() if k != "embed_table"}
            _compute.note_inputs(out, inputs)
            logits, fed, tokens = run_compute(model, inputs, int(entry.get("compute_steps", _compute.STEPS)),
                                              cfg.vocab_size)
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


def init_process_group(target_dir: Path) -> None:
    """One-process gloo group (SGLang's CPU backend), initialised once per process as a scheduler does
    (distributed/bootstrap.py:90-160). It reads a published context: the target alone, with parallel size 1."""
    args = ServerArgs(model_path=str(target_dir), device="cpu", skip_tokenizer_init=True)
    publish_scheduler(args)
    if init_parallel_runtime is not None:
        init_parallel_runtime(server_args=args, device="cpu", dist_port=free_port())
    elif init_torch_distributed is not None:  # 0.5.20 to 0.5.22: ModelRunner's call (model_runner.py:1144-1153)
        from sglang.srt.distributed.parallel_state_wrapper import ParallelState
        from sglang.srt.utils import numa_utils

        init_torch_distributed(server_args=args, model_config=ModelConfig.from_server_args(args), device="cpu",
                               ps=ParallelState.trivial(), dist_port=free_port(), is_draft_worker=False,
                               local_omp_cpuid=numa_utils.init_threads_binding(numa_index=0, world_size=1))
    else:  # 0.5.14: a target worker's steps of ModelRunner.init_torch_distributed, sizes 1 (model_runner.py:1213-1240)
        from sglang.srt.distributed import (
            get_default_distributed_backend,
            init_distributed_environment,
            initialize_model_parallel,
        )
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        init_distributed_environment(backend=get_default_distributed_backend("cpu"), world_size=1, rank=0,
                                     local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{free_port()}",
                                     timeout=args.dist_timeout)
        initialize_model_parallel(tensor_model_parallel_size=1)
        initialize_dp_attention(server_args=args, model_config=ModelConfig.from_server_args(args))


def main(argv: list[str]) -> int:
    argv, compute = _compute.compute_option(argv)
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    manifest = Path(argv[0])
    first = json.loads(manifest.read_text())[0]
    torch.manual_seed(0)
    init_process_group((manifest.parent / first["target_config"]).parent)
    gc.freeze()  # keep the engine's per-load gc.collect() calls cheap (see record_vllm.py)
    with mock.patch.object(rotary_base, "_is_cpu", True):
        record_one = _compute.computing(record_checkpoint, compute_checkpoint, compute)
        code = run_all(manifest, Path(argv[1]), ENGINE, VERSION, record_one, STARTED)
    _compute.write(compute, ENGINE, VERSION, STARTED)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
