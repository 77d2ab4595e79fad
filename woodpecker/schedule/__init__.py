"""Execution order and memory layout (DESIGN.md "schedule/"): SERENITY's memory-optimal order
(thesis ch. 3) and the arena that holds every activation at a fixed offset."""
