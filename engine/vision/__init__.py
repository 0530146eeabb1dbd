"""Images in: the samples attnlab ships, safe decoding of a client's PNG or JPEG, and a checkpoint's preprocessing."""
