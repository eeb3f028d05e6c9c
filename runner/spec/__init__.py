"""What may be launched: sweep specs, their fields and validator, the presets, and what
a sweep will cost before it runs."""
