"""Analyses over a model's runs: pure torch, plain data out."""
