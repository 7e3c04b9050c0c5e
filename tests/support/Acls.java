// Grants (or, after --revoke, deletes) ACLs on a Kafka cluster, for the security tests: librdkafka (and
// so rust-rdkafka) has no ACL admin calls that rust-rdkafka exposes, and
// Apache Kafka's own client does. Run with the broker's jars on the class
// path (tests/support/tls.rs does):
//
//   java -cp '<kafka>/libs/*' tests/support/Acls.java [--revoke] BOOTSTRAP \
//     PRINCIPAL TYPE NAME PATTERN OPERATION [TYPE NAME PATTERN OPERATION ...]
//
// TYPE: TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER; PATTERN: LITERAL or
// PREFIXED; OPERATION: READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS,
// ALTER_CONFIGS, DELETE, ALL. Every binding allows PRINCIPAL from any host.
// Returns once the broker's answer when asked for its ACLs holds every
// binding (or, revoking, none of them), so the authorizer applies them.

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class Acls {
    public static void main(String[] args) throws Exception {
        boolean revoke = args.length > 0 && args[0].equals("--revoke");
        if (revoke) {
            args = java.util.Arrays.copyOfRange(args, 1, args.length);
        }
        if (args.length < 6 || (args.length - 2) % 4 != 0) {
            System.err.println("usage: Acls BOOTSTRAP PRINCIPAL (TYPE NAME PATTERN OPERATION)...");
            System.exit(2);
        }
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        List<AclBinding> bindings = new ArrayList<>();
        for (int i = 2; i < args.length; i += 4) {
            ResourcePattern resource = new ResourcePattern(
                    ResourceType.valueOf(args[i]), args[i + 1], PatternType.valueOf(args[i + 2]));
            AccessControlEntry entry = new AccessControlEntry(
                    args[1], "*", AclOperation.valueOf(args[i + 3]), AclPermissionType.ALLOW);
            bindings.add(new AclBinding(resource, entry));
        }
        try (Admin admin = Admin.create(config)) {
            if (revoke) {
                admin.deleteAcls(bindings.stream().map(AclBinding::toFilter).toList()).all().get();
            } else {
                admin.createAcls(bindings).all().get();
            }
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                var listed = admin.describeAcls(AclBindingFilter.ANY).values().get();
                boolean applied = revoke
                        ? bindings.stream().noneMatch(listed::contains)
                        : listed.containsAll(bindings);
                if (applied) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("the broker does not list the changed ACLs after 30 s");
                    System.exit(1);
                }
                Thread.sleep(50);
            }
        }
        System.out.println((revoke ? "revoked " : "granted ") + bindings.size() + " ACLs of " + args[1]);
    }
}
