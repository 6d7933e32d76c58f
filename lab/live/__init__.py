"""Live-mode rails: the key (`key`), the session budget (`budget`), the secret scanner (`scanner`),
drift against the twin's profile (`drift`) and the errors that stop a live batch (`errors`).

Recording every run (frames.jsonl) is `lab.record`; the soak that repeats runs is `lab.soak`.
"""
