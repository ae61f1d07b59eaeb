"""The SGLang runtime (stand-in): server arguments, stack checks, simulated decoding."""
