"""The Brev seam: the narrow client protocol (client.py) and its brev-CLI implementation."""
