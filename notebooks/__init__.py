"""Notebook sources: make_notebook.py writes results.ipynb."""
