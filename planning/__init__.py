"""Capacity planning before deployment (StreamBed): measure small configurations on a testbed, fit a
surrogate of capacity against slots and memory, and invert it for the rate a new job must carry."""
