"""REST API (FastAPI). Routers stay thin: parse, call a service, return its view."""
