"""Examples built on the library, not part of it: a fused grouped MLP op
(``GroupedMLP``), reference models, the demo and ``explain``."""
