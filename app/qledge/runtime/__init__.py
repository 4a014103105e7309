"""Long-lived loops inside the HTTP worker."""
