"""Entry points of the SGLang runtime (stand-in): the HTTP server."""
