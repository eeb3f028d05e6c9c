"""The model: its architecture, training, weight quantization, the text it learns from,
and a user's own GPT-2-family checkpoints."""
