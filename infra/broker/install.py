"""What the embedded Kafka needs on this machine: Java 17 or newer, and the jars `make install` fetched.

`unavailable()` says why Kafka cannot run here, with the fix, or None; `open_broker` then falls back to Tansu
and the stack announces it. The launcher reads JAVA_HOME itself: it imports nothing of ours (the `launcher`
import contract), and JAVA_HOME is Java's own setting, not one of ours.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MIN_JAVA = 17


@dataclass(frozen=True, slots=True)
class Java:
    path: str
    major: int


def find_java(java_home: str | None = None) -> Java | None:
    """`$JAVA_HOME/bin/java` (or `java` on PATH) and its major version; None when there is none that runs."""
    home = java_home if java_home is not None else os.environ.get("JAVA_HOME")
    return _java(str(Path(home) / "bin" / "java") if home else shutil.which("java"))


@lru_cache(maxsize=8)
def _java(path: str | None) -> Java | None:
    """`java -version` costs the JVM's start (about 0.1 s): asked once per path and process."""
    if not path or not Path(path).exists():
        return None
    try:
        out = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392": Java 8
        major = int(m.group(2))
    return Java(path, major)


def default_libs() -> Path:
    """Where `make install` puts the jars: `<venv>/kafka/libs`."""
    return Path(sys.prefix) / "kafka" / "libs"


def kafka_version(libs: Path) -> str | None:
    """The Kafka version of the jars in `libs` (from `kafka_2.13-<version>.jar`), None when it is not there."""
    for jar in sorted(libs.glob("kafka_2.13-*.jar")) if libs.is_dir() else ():
        m = re.fullmatch(r"kafka_2\.13-(.+)\.jar", jar.name)
        if m and not m.group(1).endswith(("-test", "-sources", "-javadoc")):
            return m.group(1)
    return None


def unavailable(libs: Path | None = None, java_home: str | None = None) -> str | None:
    """Why Apache Kafka cannot run here, with the fix; None when it can."""
    libs = libs or default_libs()
    java = find_java(java_home)
    if java is None:
        return "no Java found (JAVA_HOME or java on PATH): install OpenJDK 17 or newer, then `make install`"
    if java.major < MIN_JAVA:
        return f"{java.path} is Java {java.major}; Kafka 4 needs {MIN_JAVA} or newer: install it, set JAVA_HOME"
    if kafka_version(libs) is None:
        return f"no Kafka jars in {libs}: run `make install` (Maven fetches them, infra/kafka/pom.xml)"
    return None


def cds_archive(libs: Path) -> Path:
    """The class-data-sharing archive beside the jars (`python -m infra.broker cds` makes it)."""
    return libs.parent / "kafka.jsa"
