"""Execution order and memory layout (ARCHITECTURE.md): SERENITY's memory-optimal order
(thesis ch. 3) and the arena that holds every activation at a fixed offset."""
