"""The OpenAI-compatible HTTP endpoint over the rollout model: protocol and server."""
