"""Brev I/O above the CLI package (controller/brev): the action runner that performs a
decision's actions, the shared instance listing, the per-kind call lanes and the price catalog."""
