"""The providers' CLIs' key files the app reads (services/offers/keys.py), relative to the home directory.
Apart from keys.py so the start-up check of their modes does not import the providers' modules."""

KEY_FILES = (".prime/config.json", ".config/vastai/vast_api_key", ".vast_api_key")
