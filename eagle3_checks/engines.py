"""The engine versions whose loaders and config readings this project mirrors.

Each rule that depends on an engine cites the file it was read from; these are the versions read.
"""

MIRRORED = {
    "vllm": "0.33.0",  # model_executor/models/llama_eagle3.py, transformers_utils/configs/speculators/
    "sglang": "0.5.6",  # srt/models/llama_eagle3.py (the version the AQ-MedAI drafter is served with)
    "speculators": "0.9.0",  # models/eagle3/core.py, models/eagle3/config.py
}


def describe() -> str:
    return ", ".join(f"{name} {version}" for name, version in MIRRORED.items())
