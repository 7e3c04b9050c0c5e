// Sets or removes a client id's fetch quota (`consumer_byte_rate`) through
// Kafka's Admin API, which librdkafka does not offer. Run as a single-file
// source program with the broker's libs on the class path:
//
//   java -cp '<kafka>/libs/*' tests/kafka/ClientQuota.java BOOTSTRAP CLIENT_ID BYTES_PER_S|none
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;

public class ClientQuota {
    public static void main(String[] args) throws Exception {
        ClientQuotaEntity entity =
            new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, args[1]));
        Double rate = args[2].equals("none") ? null : Double.valueOf(args[2]);
        ClientQuotaAlteration.Op op = new ClientQuotaAlteration.Op("consumer_byte_rate", rate);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", (Object) args[0]))) {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(op))))
                .all()
                .get();
        }
    }
}
