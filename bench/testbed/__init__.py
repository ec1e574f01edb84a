"""What tests and benchmarks run Engram against: transcripts built line by line, fake model APIs on 127.0.0.1,
the real Claude Code CLI, a throwaway PostgreSQL. Both import it; bench never imports tests. It is not shipped."""
