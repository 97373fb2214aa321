"""infra: the embedded broker launcher (`broker/`: Apache Kafka, and the Tansu fallback) and the ops files beside it.

Owns: the launcher, the pinned pom of Kafka's jars (`kafka/pom.xml`), `prometheus.yml`, `alerts.yml`, the Grafana
dashboard, `docker-compose.yml`, the Dockerfile and the sample journal.
May import: nothing of ours (it is a process launcher). Only `stack` (and tests, bench) import it.
"""
