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
swap on a machine without CUDA, see there):

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

from _probe import (LoadProbe, Refused, checkpoint_tensor_names, engine_stage, free_port, harness,  # noqa: E402
                    read_built_model, run_all)

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
    from sglang.srt.runtime_context import get_model as get_model_bag, publish  # noqa: E402
    set_global_server_args_for_scheduler = None
except ImportError:
    from sglang.srt.server_args import set_global_server_args_for_scheduler  # noqa: E402
    get_model_bag = publish = None
try:  # 0.5.23: publish takes the launcher's placement (runtime_context.py:230-242)
    from sglang.srt.runtime_context import SpawnRanks  # noqa: E402
except ImportError:  # 0.5.20 to 0.5.22: ranks are read from the process groups (0.5.20 runtime_context.py:373-395)
    SpawnRanks = None
try:  # 0.5.23 (distributed/bootstrap.py:90-160)
    from sglang.srt.distributed.bootstrap import init_parallel_runtime  # noqa: E402
except ImportError:
    init_parallel_runtime = None
try:  # 0.5.20 (distributed/bootstrap.py:70-172, called at model_runner.py:1144-1153)
    from sglang.srt.distributed.bootstrap import init_torch_distributed  # noqa: E402
except ImportError:  # 0.5.14: the steps of ModelRunner.init_torch_distributed (model_runner.py:1145-1288)
    init_torch_distributed = None
try:  # 0.5.20 on (model_runner_components/load_model_utils.py:195-235 in 0.5.20)
    from sglang.srt.model_executor.model_runner_components.load_model_utils import build_load_config  # noqa: E402
except ImportError:  # 0.5.14: ModelRunner.load_model builds the LoadConfig inline (model_runner.py:1368-1384)
    build_load_config = None
try:  # 0.5.20 on (model_runner_components/spec_aux_hidden_state.py:49-125 in 0.5.20)
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
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


def server_args(target_dir: Path, draft_dir: Path, context_length: int | None = None) -> ServerArgs:
    """``context_length``: ``--context-length`` (None: the target's, derived from its config)."""
    return ServerArgs(model_path=str(target_dir), speculative_algorithm="EAGLE3",
                      speculative_draft_model_path=str(draft_dir), speculative_num_steps=NUM_SPECULATIVE_TOKENS,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=NUM_SPECULATIVE_TOKENS + 1,
                      device="cpu", skip_tokenizer_init=True, dtype="bfloat16", context_length=context_length)


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


def serve_with(model: nn.Module, target: ModelConfig) -> dict[str, str]:
    """Run the worker's embedding / lm_head sharing (eagle_worker_v2.py:336-365) with stand-in target tensors,
    and say which tensors the drafter then serves with. The MLA drafter's set_embed / set_embed_and_head end with
    ``torch.cuda.empty_cache(); torch.cuda.synchronize()`` (models/kimi_k25_eagle3.py:413-414, 421-422): device
    housekeeping after the swap, which raises without a CUDA driver; on a machine without one, synchronize is a no-op
    here (the second stub, confined to this call: the tensors are swapped before it)."""
    text = target.hf_text_config
    embed = torch.empty(text.vocab_size, text.hidden_size)
    head = torch.empty(text.vocab_size, text.hidden_size)
    no_cuda = mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: None) if not torch.cuda.is_available() \
        else ExitStack()
    with no_cuda:
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
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    manifest = Path(argv[0])
    first = json.loads(manifest.read_text())[0]
    torch.manual_seed(0)
    init_process_group((manifest.parent / first["target_config"]).parent)
    gc.freeze()  # keep the engine's per-load gc.collect() calls cheap (see record_vllm.py)
    with mock.patch.object(rotary_base, "_is_cpu", True):
        return run_all(manifest, Path(argv[1]), ENGINE, VERSION, record_checkpoint, STARTED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
