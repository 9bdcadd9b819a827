"""Reading and writing checkpoint files: safetensors and .bin headers, and the checkpoint view over them."""
