"""The core: tape storage, the sweep driver, scalar and block-op rules, strong zeros,
checked mode's diagnosis, drawing and tape files. No handles, no tracing."""
