import java.sql.*;

// QueryModes runs transactions with pgjdbc's preferQueryMode given as
// args[3] and prints what the client sees; the Go test runs it against
// PostgreSQL directly and through an Ordo node and compares the output.
// In extendedForPrepared and extendedCacheEverything modes plain
// Statements, and the BEGIN of each transaction, go as simple Queries
// after the Closes of dead portals and before any Sync: a Query inside an
// extended-protocol batch.
public class QueryModes {
    public static void main(String[] args) throws Exception {
        String table = args[4];
        try (Connection c = DriverManager.getConnection(args[0] + "&preferQueryMode=" + args[3], args[1], args[2])) {
            Statement st = c.createStatement();
            c.setAutoCommit(false);
            for (int t = 0; t < 8; t++) {
                // The driver closes the portals of collected result sets
                // ahead of its next statement.
                System.gc();
                Thread.sleep(20);
                try {
                    if (t % 3 == 0) {
                        // A Statement first: its BEGIN is a Query.
                        st.executeUpdate("INSERT INTO " + table + " VALUES (" + (100 + t) + ")");
                    } else if (t % 3 == 1) {
                        try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                            rs.next();
                        }
                    }
                    try (PreparedStatement ps = c.prepareStatement("SELECT id FROM " + table + " WHERE id >= ?")) {
                        ps.setFetchSize(1);
                        ps.setInt(1, t);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                        }
                    }
                    try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                        rs.next();
                    }
                    st.executeUpdate("INSERT INTO " + table + " VALUES (" + (200 + t) + ")");
                    c.commit();
                    System.out.println("transaction " + t + " committed");
                } catch (SQLException e) {
                    System.out.println("transaction " + t + ": " + e.getSQLState() + " " + e.getMessage());
                    c.rollback();
                }
            }
            c.setAutoCommit(true);
            try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                rs.next();
                System.out.println("rows " + rs.getLong(1));
            }
        }
        // Autocommit writes as plain Statements after a server-prepared
        // statement left the driver's cache of one: its Close goes ahead
        // of the next statement, a simple Query, with no Sync between.
        try (Connection c = DriverManager.getConnection(args[0] + "&preferQueryMode=" + args[3]
                + "&prepareThreshold=1&preparedStatementCacheQueries=1", args[1], args[2])) {
            Statement st = c.createStatement();
            for (int t = 0; t < 4; t++) {
                try {
                    try (PreparedStatement ps = c.prepareStatement("SELECT id FROM " + table + " WHERE id >= ? AND " + t + " = " + t)) {
                        ps.setInt(1, t);
                        for (int k = 0; k < 2; k++) {
                            try (ResultSet rs = ps.executeQuery()) {
                                rs.next();
                            }
                        }
                    }
                    st.executeUpdate("INSERT INTO " + table + " VALUES (" + (300 + t) + ")");
                    System.out.println("autocommit insert " + t + " done");
                } catch (SQLException e) {
                    System.out.println("autocommit insert " + t + ": " + e.getSQLState() + " " + e.getMessage());
                }
            }
            try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                rs.next();
                System.out.println("rows " + rs.getLong(1));
            }
        }
    }
}
