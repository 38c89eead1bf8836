"""SQLite storage: schema, migrations, repositories, vectors."""
