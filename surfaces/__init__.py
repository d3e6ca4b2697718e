"""What people use: the CLI (`surfaces.cli`) and its text views (`surfaces.terminal`). Each
surface parses and prints; every action and every read goes through the typed client."""
