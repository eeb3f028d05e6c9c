"""Everything that produces numbers: model, training, decoding, timing, sweeps, the CLI."""
