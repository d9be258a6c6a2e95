"""Evals for the agent: versioned cases, predicates over plan, trajectory and answer, a runner
that drives real runs through the services, statistics, the baseline gate and an LLM judge.

Built on services and selectors; runs are advanced through plans.journal.tasks' public hook.
"""
