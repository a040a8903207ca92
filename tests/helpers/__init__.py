"""Helpers of the tests: servers, child processes, runs and shared checks (no tests here)."""
