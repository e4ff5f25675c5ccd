"""Wear-counter readers: SMART, NVMe logs, vendor logs, FEMU vendor bytes, psutil."""
