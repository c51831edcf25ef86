import java.sql.*;

// Compat runs a fixed JDBC session and prints its results; the Go test runs
// it directly against PostgreSQL and through Ordo and compares the output.
public class Compat {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            Statement st = c.createStatement();
            st.execute("CREATE TABLE j(id int PRIMARY KEY, v text)");
            // Past prepareThreshold (5) the driver switches to named
            // server-side prepared statements.
            try (PreparedStatement ps = c.prepareStatement("SELECT ?::int * 2, ?::text")) {
                for (int i = 0; i < 8; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "s" + i);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("ps " + i + " " + rs.getInt(1) + " " + rs.getString(2));
                    }
                }
            }
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO j VALUES (?, ?)")) {
                for (int i = 0; i < 100; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "v" + i);
                    ps.addBatch();
                }
                int[] r = ps.executeBatch();
                System.out.println("batch " + r.length + " first=" + r[0]);
            }
            c.commit();
            c.setAutoCommit(true);
            try (ResultSet rs = st.executeQuery("SELECT count(*), sum(id) FROM j")) {
                rs.next();
                System.out.println("rows " + rs.getLong(1) + " sum " + rs.getLong(2));
            }
            Statement s2 = c.createStatement();
            Thread th = new Thread(() -> {
                try {
                    Thread.sleep(300);
                    s2.cancel();
                } catch (Exception e) {
                    System.out.println("cancel thread: " + e);
                }
            });
            th.start();
            long t0 = System.nanoTime();
            try {
                s2.execute("SELECT pg_sleep(20)");
                System.out.println("cancel: statement was not canceled");
            } catch (SQLException e) {
                System.out.println("cancel: " + e.getSQLState() + " fast=" + ((System.nanoTime() - t0) < 5_000_000_000L));
            }
            th.join();
            try {
                st.execute("INSERT INTO j VALUES (1, 'dup')");
            } catch (SQLException e) {
                System.out.println("error " + e.getSQLState());
            }
            try (ResultSet rs = st.executeQuery("SELECT v FROM j WHERE id = 42")) {
                rs.next();
                System.out.println("after error " + rs.getString(1));
            }
        }
    }
}
