"""accounts"""
from alembic import op
import sqlalchemy as sa

revision = "r1"
down_revision = None


def upgrade():
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
    )
    op.execute("INSERT INTO accounts (name) VALUES ('alice'), ('bob')")


def downgrade():
    op.drop_table("accounts")
