"""Provider sessions and provider threads, their capabilities and settings."""
