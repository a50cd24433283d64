"""Small utilities every layer may use: errors, type hints, .npz files, progress, memory."""
