"""The graph rewrites of AOTAutograd's graph before Inductor compiles it, one pass a module; they never import the runtime."""
