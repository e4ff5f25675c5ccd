"""kvwear's shared primitives: units, registries, versioned tables and errors.

Every stage package (workloads, policies, harness, emulator, reports) may import this
package; it imports none of them. It must not hold stage logic.
"""

__version__ = "0.1.0"
