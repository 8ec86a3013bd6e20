"""The rollout: tasks → workflows → experiences (the explorer, its workflow runners, the
model wrapper workflows talk to, auxiliary models)."""
