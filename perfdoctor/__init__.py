"""perfdoctor: profile an unmodified PyTorch training script, diagnose it, fix it, measure."""

__version__ = "0.1.0"
