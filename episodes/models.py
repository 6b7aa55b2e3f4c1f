"""Models arrive with this app's issue; see DESIGN.md §2."""
