"""The recrawl scheduler: stored pages due again, published into their domain queues."""
