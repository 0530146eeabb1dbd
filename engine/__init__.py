"""attnlab's attention engine: pure torch, nothing from the web layer (a test walks its sources)."""

from engine.attention import AttentionOutput, AttentionWeights, attention, from_concatenated
from engine.masks import MaskSpec, eligibility

__all__ = ["AttentionOutput", "AttentionWeights", "MaskSpec", "attention", "eligibility", "from_concatenated"]
