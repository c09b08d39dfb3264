// preload_jthreads: a multi-threaded Java program, for the JVM's thread
// start (HotSpot calls pthread_getattr_np at each thread's entry) under the
// interposer. THREADS threads each compress ROUNDS buffers with
// java.util.zip (native zlib, on the C heap) and build strings (the Java
// heap); the program prints a checksum that does not depend on scheduling.
//
//   java -cp DIR Jthreads THREADS ROUNDS
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;
import java.util.zip.Deflater;

class Jthreads {
	public static void main(String[] args) throws Exception {
		int threads = Integer.parseInt(args[0]), rounds = Integer.parseInt(args[1]);
		long[] sums = new long[threads];
		List<Thread> ts = new ArrayList<>();
		for (int i = 0; i < threads; i++) {
			final int id = i;
			Thread t = new Thread(() -> {
				CRC32 crc = new CRC32();
				byte[] out = new byte[1 << 16];
				for (int r = 0; r < rounds; r++) {
					StringBuilder sb = new StringBuilder();
					for (int j = 0; j < 200; j++)
						sb.append(id).append(':').append(r).append(':').append(j).append(';');
					Deflater d = new Deflater();
					d.setInput(sb.toString().getBytes());
					d.finish();
					int n = d.deflate(out);
					d.end();
					crc.update(out, 0, n);
				}
				sums[id] = crc.getValue();
			});
			ts.add(t);
			t.start();
		}
		long total = 0;
		for (int i = 0; i < threads; i++) {
			ts.get(i).join();
			total += sums[i];
		}
		System.out.println("threads " + threads + " checksum " + total);
	}
}
