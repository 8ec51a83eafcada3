"""Network edges every adapter shares: the egress policy and the HTTP client helpers."""
