"""infra: the embedded broker launcher (`broker.py`) and the ops files beside it.

Owns: the Tansu launcher, `prometheus.yml`, `alerts.yml`, the Grafana dashboard, `docker-compose.yml`,
the Dockerfile and the sample journal.
May import: nothing of ours (it is a process launcher). Only `stack` (and tests, bench) import it.
"""
