"""Hardware profiles: layered YAML data (GPU model -> platform -> profile -> site -> host)."""

from nodegate.profiles.loader import Profile, list_profiles, resolve_profile

__all__ = ["Profile", "list_profiles", "resolve_profile"]
