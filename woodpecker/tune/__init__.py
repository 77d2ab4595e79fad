"""Auto-tuning: knob spaces shared by every searcher (Woodpecker-DL §2.3–2.4)."""
