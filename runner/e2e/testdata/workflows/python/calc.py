def add(a, b):
    return a + b  # TODO: overflow checks
