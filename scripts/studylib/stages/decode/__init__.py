"""The decode stage: serve a model, hold a closed-loop load at each concurrency, check it
with SGLang's own client, record the experts and profile a step; its tables, judgements,
answers (questions 4 and 5), figures and report section."""
