"""Reading the program Inductor generated (its statements, what each reads and writes), planning it and writing it again on streams."""
